//! Limits that keep probes answering when many clients come.
//!
//! Every HTTP connection holds a file descriptor. A process inherits its soft
//! open-file limit (`RLIMIT_NOFILE`), 1024 under systemd, while the hard limit
//! is usually far higher (systemd's is 524288). At the soft limit `accept()`
//! fails with EMFILE; actix-server then logs `error accepting connection: Too
//! many open files` and stops accepting for 500 ms at a time, so every request
//! waits, a probe's `GET /api/v2/monitor/health` too. Three guards, outermost
//! first:
//!
//! | guard | where | what it bounds |
//! | --- | --- | --- |
//! | [`raise_open_files`] | start of `serve` | the soft limit, raised to the hard one |
//! | [`HttpLimits::max_connections`] | the HTTP server | connections held at once: the limit less [`RESERVED_DESCRIPTORS`]; past it new connections wait in the listen backlog ([`LISTEN_BACKLOG`]) and `accept()` is not called, so it never meets EMFILE |
//! | [`HttpLimits::max_stream_clients`] | the SSE route | streams held at once (`api.max_stream_clients`), at least [`REQUEST_HEADROOM`] below `max_connections`, so stream clients alone never fill the server; one more gets 503 |

/// Descriptors kept for everything but HTTP connections: stdio, the listener,
/// each runtime's epoll and wake-up descriptors (the main runtime, every HTTP
/// worker, the actors' thread), the database pools (up to 4 + 4 connections; a
/// SQLite one holds its file, `-wal` and `-shm`) and broker connections.
/// `serve` holds about 32 at rest (measured: SQLite and a LocalExecutor;
/// PostgreSQL, a Celery executor pinging its workers and a LocalExecutor); this
/// leaves room for more executors and a busy pool.
pub const RESERVED_DESCRIPTORS: u64 = 96;

/// Connections kept for plain requests (`/api/v2/monitor/health`, `/metrics`)
/// when the SSE stream is full: `max_stream_clients` is lowered to leave them.
pub const REQUEST_HEADROOM: usize = 32;

/// Connections the kernel queues while none is being accepted: a burst of
/// clients (dashboards reconnecting after a restart) waits here, probes among
/// them, instead of having its SYNs dropped and retried a second or more
/// later. std listens with 128; the kernel caps it at `net.core.somaxconn`
/// (4096 by default).
pub const LISTEN_BACKLOG: i32 = 1024;

/// Widens `listener`'s backlog to [`LISTEN_BACKLOG`]; a failure is one WARN
/// line, and the listener keeps the backlog it has.
pub fn widen_backlog(listener: &std::net::TcpListener) {
    // listen() again on a socket that listens already only changes its backlog.
    if let Err(e) = socket2::SockRef::from(listener).listen(LISTEN_BACKLOG) {
        tracing::warn!("cannot widen the listen backlog to {LISTEN_BACKLOG}: {e}");
    }
}

/// Raises the soft open-file limit to the hard one, and returns the soft limit
/// now in force (`None`: unlimited, or unknown). Says what it did at debug; a
/// failure is one WARN line, and the service goes on with the limit it has.
pub fn raise_open_files() -> Option<u64> {
    match raise() {
        Ok((before, after)) if before == after => {
            tracing::debug!(
                "the soft open-file limit is already the hard limit: {}",
                shown(after)
            );
            after
        }
        Ok((before, after)) => {
            tracing::debug!(
                "raised the soft open-file limit from {} to the hard limit, {}",
                shown(before),
                shown(after)
            );
            after
        }
        Err((soft, e)) => {
            tracing::warn!(
                "cannot raise the soft open-file limit ({}) to the hard one: {e}",
                shown(soft)
            );
            soft
        }
    }
}

/// A limit as people write it.
fn shown(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
}

/// The soft limit before and after raising it (`None`: unlimited).
type Raised = (Option<u64>, Option<u64>);

/// The soft limit kept, and why it could not be raised.
type NotRaised = (Option<u64>, std::io::Error);

#[cfg(unix)]
fn raise() -> Result<Raised, NotRaised> {
    use rlimit::Resource;
    let finite = |n: u64| (n != rlimit::INFINITY).then_some(n);
    let (before, hard) = Resource::NOFILE.get().map_err(|e| (None, e))?;
    if before == hard {
        return Ok((finite(before), finite(before)));
    }
    Resource::NOFILE
        .set(hard, hard)
        .map_err(|e| (finite(before), e))?;
    Ok((finite(before), finite(hard)))
}

#[cfg(not(unix))]
fn raise() -> Result<Raised, NotRaised> {
    Ok((None, None))
}

/// What the HTTP server may hold at once, from the open-file limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections, all workers together.
    pub max_connections: usize,
    /// SSE clients: `api.max_stream_clients`, lowered when the limit leaves
    /// fewer beside [`REQUEST_HEADROOM`].
    pub max_stream_clients: usize,
}

impl HttpLimits {
    /// The limits for a soft open-file limit of `open_files` (`None`: unlimited,
    /// or unknown) and a configured `max_stream_clients`. Lowering the stream
    /// cap is said in one WARN line naming the key.
    pub fn new(open_files: Option<u64>, max_stream_clients: u32) -> Self {
        let configured = max_stream_clients as usize;
        let Some(open_files) = open_files else {
            return Self {
                max_connections: usize::MAX,
                max_stream_clients: configured,
            };
        };
        let max_connections = usize::try_from(open_files.saturating_sub(RESERVED_DESCRIPTORS))
            .unwrap_or(usize::MAX)
            .max(1);
        let room = max_connections.saturating_sub(REQUEST_HEADROOM).max(1);
        if configured > room {
            tracing::warn!(
                "api.max_stream_clients is {configured}, but the open-file limit ({open_files}) \
                 leaves room for {room} streams beside requests: serving at most {room}"
            );
        }
        Self {
            max_connections,
            max_stream_clients: configured.min(room),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_stay_below_the_connections_and_those_below_the_limit() {
        assert_eq!(
            HttpLimits::new(Some(256), 100),
            HttpLimits {
                max_connections: 160,
                max_stream_clients: 100,
            }
        );
        // Too many streams for the limit: lowered to leave the headroom.
        assert_eq!(
            HttpLimits::new(Some(256), 256),
            HttpLimits {
                max_connections: 160,
                max_stream_clients: 128,
            }
        );
        // systemd's hard limit: the configured cap stands.
        assert_eq!(HttpLimits::new(Some(524_288), 256).max_stream_clients, 256);
        // A limit below the reserve still serves one of each.
        assert_eq!(
            HttpLimits::new(Some(10), 256),
            HttpLimits {
                max_connections: 1,
                max_stream_clients: 1,
            }
        );
        assert_eq!(
            HttpLimits::new(None, 256),
            HttpLimits {
                max_connections: usize::MAX,
                max_stream_clients: 256,
            }
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let after = raise_open_files();
        let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap();
        assert_eq!(soft, hard);
        assert_eq!(after, Some(soft));
    }
}
