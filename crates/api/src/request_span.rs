//! One `DEBUG` span per request, and one `DEBUG` line when it is answered:
//! what `OVERSEER_LOG=overseer_api=debug` shows of each request. At the
//! default level (`info`) neither exists, and a request pays one cached
//! level check for them.
//!
//! It replaces `tracing-actix-web`'s `TracingLogger`, which builds an `INFO`
//! span per request whatever the level: a request id from the system's random
//! source, the connection's info, and every field formatted to text by the log
//! writer, though at the default level nothing of it is ever written. That was
//! 44% of the instructions of a `GET /api/v2/monitor/health` (callgrind, the
//! release binary at the default level), and the health route fell to 0.75 of a
//! bare actix-web route serving the same bytes.

use std::future::{Ready, ready};
use std::time::Instant;

use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use futures_util::future::{Either, LocalBoxFuture};
use tracing::Instrument;

/// The middleware: `App::new().wrap(RequestSpan)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpan;

impl<S, B> Transform<S, ServiceRequest> for RequestSpan
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Transform = RequestSpanService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RequestSpanService { service }))
    }
}

/// [`RequestSpan`] around the app's service.
pub struct RequestSpanService<S> {
    service: S,
}

impl<S, B> Service<ServiceRequest> for RequestSpanService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Future = Either<S::Future, LocalBoxFuture<'static, Result<Self::Response, Self::Error>>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        // The fields are computed only when the span is enabled.
        let span = tracing::debug_span!(
            "request",
            method = %request.method(),
            target = %request.uri(),
            peer = ?request.peer_addr(),
        );
        if span.is_disabled() {
            return Either::Left(self.service.call(request));
        }
        let started = Instant::now();
        let answered = self.service.call(request);
        Either::Right(Box::pin(
            async move {
                let result = answered.await;
                match &result {
                    Ok(response) => tracing::debug!(
                        status = response.status().as_u16(),
                        elapsed = ?started.elapsed(),
                        "answered"
                    ),
                    Err(error) => tracing::debug!(%error, elapsed = ?started.elapsed(), "failed"),
                }
                result
            }
            .instrument(span),
        ))
    }
}
