//! The Redis broker's watch: a `BLPOP` on a key nobody writes, [`WATCH_WAIT`]
//! at a time, over a connection of its own, driven by [`crate::broker::held`].
//! A broker that dies closes the connection and the blocked command fails at
//! once; one that stops answering misses the reply's due time ([`WATCH_WAIT`]
//! and [`REDIS_TIMEOUT_LAG`] and [`WATCH_GRACE`]); one that refuses the
//! command (an ACL without `BLPOP`, a demoted master's `READONLY`) answers
//! with an error.

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout_at};

use super::{REDIS_TIMEOUT_LAG, RedisCheck};
use crate::broker::held::{Ended, Link, Refusal};

/// How long a watch's `BLPOP` blocks: the watched connection's heartbeat.
pub(super) const WATCH_WAIT: Duration = Duration::from_secs(1);
/// Beyond [`WATCH_WAIT`] and [`REDIS_TIMEOUT_LAG`], how late the empty answer may
/// be before the broker counts as not answering.
pub(super) const WATCH_GRACE: Duration = Duration::from_millis(500);
/// How long a watch waits for a connection (its driver's response timeout too,
/// which must outlast a blocked [`WATCH_WAIT`]).
pub(super) const WATCH_CONNECT: Duration = Duration::from_secs(3);

/// The watch's connection to one broker, blocking on `key`.
pub(super) struct Watch<'a> {
    pub(super) check: &'a RedisCheck,
    /// A key of the watch's own, never written.
    pub(super) key: String,
}

impl Link for Watch<'_> {
    type Conn = MultiplexedConnection;

    async fn connect(&mut self) -> Result<MultiplexedConnection, Ended> {
        let deadline = Instant::now() + WATCH_CONNECT;
        self.check
            .connect(deadline, WATCH_CONNECT)
            .await
            .map_err(|reason| Ended::Gone(Some(reason)))
    }

    async fn hold(&mut self, mut conn: MultiplexedConnection) -> Ended {
        loop {
            let due = Instant::now() + WATCH_WAIT + REDIS_TIMEOUT_LAG + WATCH_GRACE;
            let popped: Result<redis::RedisResult<Value>, _> = timeout_at(
                due,
                redis::cmd("BLPOP")
                    .arg(&self.key)
                    .arg(WATCH_WAIT.as_secs_f64())
                    .query_async(&mut conn),
            )
            .await;
            match popped {
                Ok(Ok(_)) => {}
                // The broker answered, with an error.
                Ok(Err(e)) if e.code().is_some() && !e.is_connection_dropped() => {
                    return Ended::Refused(Refusal {
                        reason: self.check.describe(e, WATCH_CONNECT),
                        warning: "the broker refuses the watch's BLPOP: its death is seen at \
                                  the next poll, not at once",
                        note: String::new(),
                    });
                }
                Ok(Err(e)) => return Ended::Gone(Some(self.check.describe(e, WATCH_CONNECT))),
                Err(_) => return Ended::Gone(Some(self.check.timed_out(WATCH_WAIT + WATCH_GRACE))),
            }
        }
    }
}
